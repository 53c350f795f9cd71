"""Real architectures: published model definitions from timm and HF transformers."""
