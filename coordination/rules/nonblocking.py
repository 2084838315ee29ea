"""ESync's non-blocking mode with delayed ACK (the paper's section 4.2): the apply rule's question after every
local step, which the worker sends without waiting for the answer; the state server answers it as the apply rule."""
from coordination.rules.base import Rule

NAME = "nonblocking"
RULE = Rule(NAME, esync=True)
