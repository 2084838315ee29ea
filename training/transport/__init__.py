"""How a process talks to the others: the aggregation's transport, the ps-lite kvstore or MPI's allreduce
(collectives) and the bytes it moves (traffic), and the scheduler's and servers' node (ps_node). The workers' client
of the state server is coordination/client.py."""
