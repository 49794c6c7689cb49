"""The RNN family: encoder-decoder RNNs with attention (Bahdanau et al. 2015; Luong et al. 2015)."""
