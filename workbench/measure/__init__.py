"""Work on a real engine: live per-layer timing and latency capture, and precision debugging
inside the engine (mark, run, compare, bisect)."""
