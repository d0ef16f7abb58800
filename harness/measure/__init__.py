"""Measurement: the timer (events, graph replay, L2 flush), roofline and ceilings, the environment a
record carries, JSONL records and their index, figures, and where results go."""
