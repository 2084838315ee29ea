"""How a process talks to the others: the aggregation's transport, the ps-lite kvstore or MPI's allreduce
(collectives) and the bytes it moves (traffic), the scheduler's and servers' node (ps_node), and the workers' client
of the state server (state_client)."""
