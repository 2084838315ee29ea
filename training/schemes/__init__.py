"""The synchronization schemes, one module per family; training/modes.py names the class of each -m mode."""
