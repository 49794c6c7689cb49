"""Other toolkits' model folders: a Hugging Face Marian folder (OPUS-MT) read into a model file and
written back, and a Transformer written for CTranslate2 and decoded by it. Each format asks the family
for its names (families/<arch>/layouts.py); none knows a tensor layout itself."""
