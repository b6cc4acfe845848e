"""benchmarks/bench_flower.py's Flower app (not an example: see examples/flower)."""
