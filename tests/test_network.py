"""The links of a job on a virtual clock (training/clocks/network.py): a sum over the parameter server as ps-lite
deploys it (its keys placed over the servers, every link full duplex and shared fairly), the asynchronous servers'
queues, MPI's allreduce, and the rates a user gives."""
import glob
import itertools
import os
import statistics

import pytest

from analysis import summary
from launcher import experiment
from tests.test_virtual_clock import virtual_run
from training import runlog
from training.checks import UsageError
from training.clocks import network
from training.clocks.network import Link, Network

SECOND_A_TRANSFER = Link(seconds_per_byte=0.01)  # 100 bytes: 1 s


def test_concurrent_uploads_share_the_servers_link_and_no_rank_gets_its_sum_first():
    net = Network.uniform(2, SECOND_A_TRANSFER)

    # both pushes share the server's inbound link (2 s), both pulls its outbound link (2 s more)
    assert net.sum_finishes({0: 0.0, 1: 0.0}, [100]) == pytest.approx({0: 4.0, 1: 4.0})


def test_a_late_push_has_the_link_to_itself_and_the_pulls_start_when_the_last_push_is_in():
    net = Network.uniform(2, SECOND_A_TRANSFER)

    assert net.sum_finishes({0: 5.0, 1: 0.0}, [100]) == pytest.approx({0: 8.0, 1: 8.0})


def test_on_free_links_a_sum_ends_at_the_last_arrival():
    assert Network.uniform(2, Link()).sum_finishes({0: 1.0, 1: 2.5}, [400]) == {0: 2.5, 1: 2.5}


def test_a_workers_finish_depends_on_its_arrival_not_on_its_position():
    net = Network.uniform(4, SECOND_A_TRANSFER)
    arrivals = [0.0, 0.0, 0.3, 7.0]

    finishes = set()
    for order in itertools.permutations(range(4)):
        finished = net.sum_finishes({rank: arrivals[i] for rank, i in enumerate(order)}, [100])
        finishes |= {round(finish, 9) for finish in finished.values()}
    assert len(finishes) == 1 and finishes.pop() > max(arrivals)  # one finish, whichever rank arrives last


def test_a_keys_sum_comes_back_while_the_next_key_still_goes_up_as_the_kvstore_pipelines_them():
    net = Network.uniform(2, Link(seconds_per_byte=0.001))  # a key of 4,000 bytes: 4 s alone on a link

    # both push key 0 (8 s on the server's inbound link); key 1 goes up while key 0 comes down (8 s), then key 1
    # comes down: 24 s, against 32 s were the pulls to wait for the whole model
    assert net.sum_finishes({0: 0.0, 1: 0.0}, [[4000, 4000]]) == pytest.approx({0: 24.0, 1: 24.0})


def test_a_keys_sum_waits_for_every_ranks_push_of_that_key():
    net = Network.uniform(2, Link(seconds_per_byte=0.001))

    # rank 1 pushes key 0 over 10-14 s and key 1 over 14-18 s; key 0 comes down to both over 14-22 s, key 1 after it
    assert net.sum_finishes({0: 0.0, 1: 10.0}, [[4000, 4000]]) == pytest.approx({0: 30.0, 1: 30.0})


def test_a_few_bytes_of_a_key_ride_with_the_next_key_to_their_server():
    assert network.pipelined_parts([40, 4000, 24, 8000, 12]) == [4040, 8036]
    assert network.pipelined_parts([40, 12]) == [52]


def test_ps_lite_keeps_a_small_array_whole_on_one_server_and_splits_a_big_one_over_all():
    net = Network.uniform(2, SECOND_A_TRANSFER, num_servers=3)

    held = net.shards([0, 1, 2], [10, 999, 3000])  # float32 elements; the bound is 1,000
    # key 0 -> server 0, key 1 -> 9973 mod 3 = 1, key 2 split in thirds; each server's keys in the keys' order
    assert held == [[40, 4000], [3996, 4000], [4000]]


def test_as_many_servers_as_workers_carry_a_sum_as_fast_as_each_workers_own_link():
    one, six = (Network.uniform(6, SECOND_A_TRANSFER, num_servers=s) for s in (1, 6))
    arrivals = dict.fromkeys(range(6), 0.0)
    model = ([0], [1500])  # 6,000 bytes, split over the servers: 60 s over one link

    # one server: 6 pushes through its link, then 6 pulls; six: each link carries one model's bytes each way
    assert one.sum_finishes(arrivals, one.shards(*model)) == pytest.approx(dict.fromkeys(range(6), 720.0))
    assert six.sum_finishes(arrivals, six.shards(*model)) == pytest.approx(dict.fromkeys(range(6), 120.0))


def test_a_faster_server_link_takes_as_many_pushes_at_once_as_it_is_times_faster():
    arrivals = dict.fromkeys(range(6), 0.0)
    worker = SECOND_A_TRANSFER
    net = Network.uniform(6, worker, server=network.server_link("6x", worker))

    assert net.sum_finishes(arrivals, [100])[3] == pytest.approx(2.0)


def test_a_server_adds_the_last_push_before_it_hands_the_sum_back():
    adding = Network.uniform(2, SECOND_A_TRANSFER, apply=0.005)  # 0.5 s for 100 bytes

    assert adding.sum_finishes({0: 0.0, 1: 0.0}, [100]) == pytest.approx({0: 4.5, 1: 4.5})


def test_a_link_left_idle_by_a_slow_flow_goes_to_the_others():
    # two flows into one resource of 4 bytes/s; one is held to 1 byte/s by its other resource
    rates = network.max_min_rates([("slow", "server"), ("fast", "server")], {"slow": 1, "fast": 10, "server": 4})

    assert rates == [1, 3]


def test_the_asynchronous_servers_serve_one_transfer_at_a_time_each_way_in_the_order_asked():
    net = Network.uniform(2, SECOND_A_TRANSFER, num_servers=2)
    free = {}

    assert net.reserve(free, 0, [100, 0], 0.0, network.DOWN) == pytest.approx(1.0)
    assert net.reserve(free, 1, [100, 0], 0.5, network.DOWN) == pytest.approx(2.0)   # behind rank 0's push
    assert net.reserve(free, 1, [0, 100], 0.5, network.DOWN) == pytest.approx(1.5)   # the other server is free
    assert net.reserve(free, 0, [100, 0], 0.5, network.UP) == pytest.approx(1.5)     # the other direction too


def test_an_allreduce_over_mpi_is_charged_its_slowest_ranks_exchanges_on_the_workers_links():
    link = Link(seconds_per_byte=1e-6, latency=0.001)
    count = 3000  # float32: 12,000 bytes
    # ring over 3 ranks: 2 x 2 exchanges of a third each; butterfly over 4: 2 exchanges of the whole buffer
    assert network.allreduce_seconds("ring", 3, count, (link,) * 3) == pytest.approx(4 * (4000e-6 + 0.001))
    assert network.allreduce_seconds("butterfly", 4, count, (link,) * 4) == pytest.approx(2 * (12000e-6 + 0.001))


@pytest.mark.parametrize("text, bits", [("6x", 6e6), ("100mbit", 1e8), (None, 1e6)])
def test_a_servers_rate_is_a_rate_or_a_multiple_of_the_workers(text, bits):
    assert network.server_bits(text, 10 ** 6) == bits


@pytest.mark.parametrize("text", ["6", "-2x", "fast", "100MB"])
def test_a_servers_rate_that_is_neither_is_refused(text):
    with pytest.raises(ValueError, match="6x"):
        network.parse_server_rate(text)


# ----------------------------------------------------------------------------------------------
# The launcher's servers and links, and real jobs on the virtual clock


def test_a_servers_rate_on_loopback_in_real_time_is_refused_rather_than_ignored():
    with pytest.raises(UsageError, match="--ps-bandwidth 6x: the servers' links are shaped with --hosts netns"):
        experiment.parse(["--modes", "sync", "--slowdown", "1,4", "--max-time", "5", "--ps-bandwidth", "6x"])


def test_the_servers_count_and_rate_reach_the_virtual_job_and_its_links_line():
    given = experiment.parse(["--modes", "sync", "--slowdown", "1,4", "--max-time", "5", "--clock", "virtual",
                              "--step-seconds", "0.01", "--comm-ratio", "3", "-s", "2", "--ps-bandwidth", "2x"])

    assert (given.cluster.num_servers, given.cluster.ps_link) == (2, "2x")
    assert given.describe_links().endswith("; 2 parameter server(s) on links of 2x")


@pytest.mark.slow
@pytest.mark.beside_others("in-process")  # a virtual clock's results do not depend on the machine's load
def test_more_parameter_servers_or_faster_server_links_make_the_sums_sooner(tmp_path):
    rounds = {}
    for name, servers in (("one", ["-s", "1"]), ("three", ["-s", "3"]), ("faster", ["--ps-bandwidth", "3x"])):
        logs = str(tmp_path / name)
        code, output = virtual_run(logs, "sync", "1,1,4", "--comm-ratio", "6", *servers, "--", "-b", "16")
        assert code == 0, output
        rounds[name] = summary.summarize_mode(os.path.join(logs, "lenet"), "sync")["num_rounds"]

    # a sum over one server's link: 3 pushes then 3 pulls; over three servers or a link 3x as fast: 1 each way
    assert rounds["three"] > 1.5 * rounds["one"] and rounds["faster"] > 1.5 * rounds["one"], rounds


@pytest.mark.slow
@pytest.mark.beside_others("in-process")  # a virtual clock's results do not depend on the machine's load
def test_esyncs_fast_workers_take_as_many_local_steps_a_round_wherever_the_profile_lists_them(tmp_path):
    logs = str(tmp_path / "logs")
    # batches of 16 charged as a step: the same rounds for a quarter of the computing
    code, output = virtual_run(logs, "esync", "117,1,1,117,1,1", "--esync-policy", "apply", "--comm-ratio", "12",
                               "--step-seconds", "0.03", "--step-jitter", "0", "--max-time", "10", "--", "-b", "16")

    assert code == 0, output
    steps = {}
    for folder in glob.glob(os.path.join(logs, "lenet", "esync", "*", "cpu-worker*")):
        records = runlog.DeviceLog(folder).ordered()
        steps[os.path.basename(folder)] = statistics.mean(runlog.local_steps(r) for r in records)
    fast = [steps[f"cpu-worker{rank}"] for rank in (1, 2, 4, 5)]
    # the sum comes back to every worker at once: no position starts its next round first
    assert min(fast) >= 20 and max(fast) <= 1.05 * min(fast), steps


def test_a_worker_link_slowdown_is_refused_on_loopback_and_named_where_it_is_charged():
    with pytest.raises(UsageError, match="--link-slowdown 1,4: the workers' links are shaped with --hosts netns"):
        experiment.parse(["--modes", "sync", "--slowdown", "1,1", "--max-time", "5", "--link-slowdown", "1,4"])
    with pytest.raises(UsageError, match="--link-slowdown has 3 factors but --devices has 2 workers"):
        experiment.parse(["--modes", "sync", "--slowdown", "1,1", "--max-time", "5", "--clock", "virtual",
                          "--step-seconds", "0.01", "--link-slowdown", "1,4,4"])
    given = experiment.parse(["--modes", "sync", "--slowdown", "1,1", "--max-time", "5", "--clock", "virtual",
                              "--step-seconds", "0.01", "--comm-ratio", "3", "--link-slowdown", "1,4"])

    assert given.cluster.link_slowdowns == ("1", "4") and given.describe_links().endswith("slower by 1,4")


def test_the_namespaces_shape_each_workers_link_to_its_own_rate():
    from launcher import netns

    class Recording:
        def __init__(self):
            self.rates = {}

        def add_host(self, name, rate):
            self.rates[name] = rate
            return name

    recorded = Recording()
    declared = experiment.parse(["--modes", "sync", "--slowdown", "1,1,1", "--max-time", "5", "--hosts", "netns",
                                 "--bandwidth", "4mbit", "--ps-bandwidth", "2x", "--num-servers", "2",
                                 "--link-slowdown", "1,4,2"])
    netns.build_cluster(recorded, declared.cluster, declared.num_workers)

    assert recorded.rates == {"ps": 8_000_000, "ps1": 8_000_000, "w0": 4_000_000, "w1": 1_000_000, "w2": 2_000_000}


@pytest.mark.slow
@pytest.mark.beside_others("in-process")  # a virtual clock's results do not depend on the machine's load
def test_a_slower_worker_link_is_charged_on_the_virtual_clock(tmp_path):
    rounds = {}
    for name, slower in (("equal", []), ("one slower", ["--link-slowdown", "1,1,8"])):
        logs = str(tmp_path / name.replace(" ", "-"))
        code, output = virtual_run(logs, "sync", "1,1,1", "--comm-ratio", "2", "-s", "3", *slower)
        assert code == 0, output
        rounds[name] = summary.summarize_mode(os.path.join(logs, "lenet"), "sync")["num_rounds"]

    # over three servers each worker's own link carries its sum; one 8x slower holds every round
    assert rounds["one slower"] < 0.6 * rounds["equal"], rounds
