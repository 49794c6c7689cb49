"""Corpora: reading a corpus's files (readers), the built-in dates, known corpora by name, the languages of
a text (detect), and preparing a corpus once into a memory-mapped store that every run reads. Torch-free
but for the store's tensors; above the core, below everything that trains."""
