"""The deterministic network simulator: N super-peer cores and their peers in one process."""

from superpeer.sim.network import START, SimPeer, Simulation
from superpeer.sim.workload import WorkloadError, check_operation, read_workload

__all__ = ["START", "SimPeer", "Simulation", "WorkloadError", "check_operation", "read_workload"]
