"""The update rules that run on the parameter servers: the one a worker hands the servers with kv.set_optimizer
(ASGD, MXNet's DC-ASGD, Downpour), and the one server's rule of Zeno++, FedAsync and the paper's DC-ASGD."""
