"""Workload generators shared by the simulator, the replay tool and the benchmarks."""
