"""A worker's clock on a virtual job, and the models of its device and links.

A step of `samples` samples is charged the device's seconds per step (for its network and batch size) x the
worker's slowdown x samples / batch size, plus the step's overhead (the loop's own work between steps, which no
quota slows), and with --step-jitter σ the whole x exp(σ z - σ²/2), z drawn from a standard normal stream seeded by
the job's seed and the worker's position: a log-normal factor of mean 1.
"""
import math
import random
from dataclasses import dataclass


@dataclass(frozen=True)
class Device:
    """What a worker's steps are charged: `step_seconds` for a batch of `batch_size` at slowdown 1."""
    step_seconds: float
    slowdown: float
    batch_size: int
    jitter: float = 0.0
    overhead: float = 0.0

    def seconds(self, samples, rng):
        seconds = self.step_seconds * self.slowdown * samples / self.batch_size + self.overhead
        if self.jitter:
            seconds *= math.exp(self.jitter * rng.gauss(0.0, 1.0) - self.jitter ** 2 / 2)
        return seconds


class VirtualClock:
    """Worker `rank`'s clock: its time is the scheduler's for it; charge_step() moves it on by its device's step."""
    charges_steps = True  # each step charged its device's seconds x its slowdown
    bounds_waits = False  # a worker waits in real time for the others' steps: no real-time bound applies

    def __init__(self, scheduler, rank, device, seed):
        self.scheduler, self.rank, self.device = scheduler, rank, device
        self.rng = random.Random(f"{seed}/{rank}")

    def now(self):
        return self.scheduler.now(self.rank)

    def charge_step(self, samples):
        self.scheduler.advance(self.rank, self.device.seconds(samples, self.rng))


def describe(step_seconds, jitter, ratio, latency=0.0, round_trip=0.0, overhead=0.0, server_apply=0.0):
    """How a virtual clock charges the devices, the links and the state server, in one line."""
    jittered = (f" + {overhead:g} s" if overhead else "") + (f", jitter {jitter:g}" if jitter else "")
    links = f"a transfer of the model {ratio:g} fast steps" if ratio else "free links (loopback)"
    links += f" + {latency:g} s a transfer" if latency else ""
    asking = f"; a request to the state server {round_trip:g} s" if round_trip else ""
    asking += f"; a server adds a pushed MB in {server_apply:g} s" if server_apply else ""
    return (f"a virtual clock: a step of one batch charged {step_seconds:g} s x the device's slowdown{jittered}; "
            f"{links}{asking}")

