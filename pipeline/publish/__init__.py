"""Publishing a run folder to the Hugging Face Hub with its dataset card."""
