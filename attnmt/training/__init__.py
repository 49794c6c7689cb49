"""Training a model: the loop over epochs (train), one update (step), what it reads of a prepared corpus
(data), where a run starts (resume), the epochs averaged, torchrun's ranks, what a run leaves to look at
(metrics, timeline), and the demo."""
