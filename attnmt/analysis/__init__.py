"""What attention and the model's numbers say of a translation: every number of a decoding step
(explain), attribution beside attention, word alignments from attention or a trained aligner, and the
notebook tables they draw as. Above the core; nothing here trains a translation model."""
