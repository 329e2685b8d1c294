"""The kinds of output slices are written to, and what they share: pybp/io/writers.py
opens them."""
