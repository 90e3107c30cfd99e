"""genmesh-export: what OVMS's ``export_model.py text_generation`` does, for a GGUF or a Hugging Face folder."""
