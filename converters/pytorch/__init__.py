"""PyTorch profiler traces (execution traces and Kineto traces) to workload ETs."""
