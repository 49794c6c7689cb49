"""Documents: texts of many sentences, translated sentence by sentence and put together again as written."""
