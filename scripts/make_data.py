#!/usr/bin/env python3
"""Regenerates the example inputs in data/ (run from the repository root).

Each sequence is a random token embedding plus the sinusoidal positional
encoding of the paper (section 3.5), so attention maps show position effects.
Needs NumPy only: /usr/bin/python3 scripts/make_data.py
"""
import numpy as np


def positional_encoding(length, d_model):
    pos = np.arange(length)[:, None]
    i = np.arange(d_model)[None, :]
    angle = pos / np.power(10000.0, (2 * (i // 2)) / d_model)
    return np.where(i % 2 == 0, np.sin(angle), np.cos(angle))


def sequences(rng, batch, length, d_model):
    x = 0.5 * rng.standard_normal((batch, length, d_model)) + positional_encoding(length, d_model)
    return x.astype(np.float32)


rng = np.random.default_rng(2017)
# Causal self-attention over 3 padded sequences (lengths in configs/causal_padded.json).
np.save("data/tokens.npy", sequences(rng, 3, 8, 64))
# Cross-attention: 6 decoder positions attend over 10 encoder positions.
np.save("data/decoder_states.npy", sequences(rng, 2, 6, 32))
np.save("data/encoder_memory.npy", sequences(rng, 2, 10, 24))
print("wrote data/tokens.npy data/decoder_states.npy data/encoder_memory.npy")
