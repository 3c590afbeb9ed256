"""The order-workload generator used by the demo and the benchmarks."""
