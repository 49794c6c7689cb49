"""The Transformer family (Vaswani et al. 2017)."""
