"""When something goes wrong: how a failing process ends (failures), the faults the tests inject on purpose
(fault_injection), ending a worker that waits forever on the cluster (watchdog) and a process whose ps-lite peer
has died (peers)."""
