"""Where problems come from: sources, the arithmetic generator, decontamination."""
