"""The machines: GPUs and MIG instances, worker pinning, and results in the Prometheus
exposition format."""
