"""The parts local SGD's synchronous averaging (training/schemes/local_sgd.py) is composed of, each chosen by its
options and tested alone (tests/test_local_sgd.py):

- what a local step adds to the gradient (corrections.py): FedProx's proximal term, SCAFFOLD's control variates;
- how a worker's delta is weighted in the sum (weighting.py): plainly, or divided by a power of its local work
  (FedNova's normalisation);
- what the global model does with the average (outer.py): MXNet's optimizer of the name --outer-optimizer gives,
  applied to it as a pseudo-gradient;
- when the average reaches the workers (timing.py): at once, or a round late while they run the next round's local
  steps (--overlap).
"""
