"""Training and exporting models from a run's data: a one-pass PRM trained on the `prm`
rows of run folders (`prm_training`, `prm_data`, `prm_trainer`), and a fine-tuned llama
checkpoint written as a GGUF the llama.cpp engine serves (`gguf_export`).  The commands
that run them (`bgmcts train-prm`, `bgmcts export-gguf`) are thin entrypoints in jobs/.
"""
