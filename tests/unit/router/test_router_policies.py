"""Each routing policy's choice on crafted replica sets."""

from __future__ import annotations

import random

import pytest

from meridian import latency
from router import endpoints, policies, testing
from router.policies import prefix_tree


class Req:
    def __init__(self, client_region: str = "na-east", prompt: str = "", tokens: int = 0):
        self.client_region = client_region
        self.prompt_tokens_estimate = tokens
        self._prompt = prompt

    def prompt_text(self) -> str:
        return self._prompt


def ep(rid: str, region: str = "us-east-1", *, pending: int = 0, queued: int = 0, cost_ms: float = 10.0,
       gpu: str = "H100", weight: float = 1.0) -> endpoints.Endpoint:
    e = endpoints.Endpoint(testing.replica(rid, 1000, region, queued=queued, gpu_type=gpu, weight=weight), "m",
                           ewma_decay_s=10.0, default_cost_ms=cost_ms, now=0.0)
    e.pending = pending
    e.share = weight
    return e


def make(name: str, seed: int = 1, **args) -> policies.Policy:
    return policies.create(name, args or None, random.Random(seed), latency.default().rtt_ms)


def test_registry_names_and_did_you_mean():
    """The registry lists the five policies and suggests the closest name for a typo."""
    assert policies.names() == ["latency", "least_request", "prefix_cache", "random", "round_robin"]
    with pytest.raises(policies.UnknownPolicy, match="did you mean 'round_robin'"):
        policies.check("round_robbin")


def test_latency_prefers_nearest_region():
    """With equal load, a client in New York is sent to Virginia rather than Dublin or Tokyo."""
    policy = make("latency")
    reps = [ep("dublin", "eu-west-1"), ep("virginia", "us-east-1"), ep("tokyo", "ap-northeast-1")]
    picks = {policy.select(reps, Req("na-east"), 0.0).replica_id for _ in range(50)}
    assert picks == {"virginia"}
    picks = {policy.select(reps, Req("eu-west"), 0.0).replica_id for _ in range(50)}
    assert picks == {"dublin"}


def test_latency_leaves_a_queued_near_replica_for_a_far_idle_one():
    """A near replica whose queue makes its expected TTFT exceed RTT to a far idle one loses."""
    policy = make("latency")
    near = ep("virginia", "us-east-1", pending=10, queued=20, cost_ms=50.0)
    far = ep("dublin", "eu-west-1", cost_ms=50.0)
    assert policy.select([near, far], Req("na-east"), 0.0) is far
    near.pending, near.load = 0, testing.replica("virginia", 1, "us-east-1").load
    assert policy.select([near, far], Req("na-east"), 0.0) is near


def test_latency_counts_prefill_on_the_gpu_type():
    """For a long prompt, a same-region replica on a faster GPU type wins."""
    policy = make("latency")
    slow = ep("t4", "us-east-1", gpu="T4")
    fast = ep("h100", "us-east-1", gpu="H100")
    assert policy.select([slow, fast], Req("na-east", tokens=4000), 0.0) is fast


def test_latency_spreads_over_near_equal_replicas():
    """Power of two choices among near-best replicas spreads load instead of herding."""
    policy = make("latency", seed=7)
    reps = [ep(f"r{i}", "us-east-1") for i in range(4)]
    picks = {policy.select(reps, Req("na-east"), 0.0).replica_id for _ in range(200)}
    assert len(picks) >= 3


def test_latency_args_are_validated():
    """Policy args are typed; a bad one names the field."""
    with pytest.raises(Exception, match="slack_ratio"):
        policies.check("latency", {"slack_ratio": -1})


def test_least_request_picks_fewest_outstanding():
    """least_request counts own in-flight plus the replica's reported queue."""
    policy = make("least_request")
    a = ep("a", pending=3)
    b = ep("b", pending=0, queued=5)
    c = ep("c", pending=1, queued=1)
    assert policy.select([a, b, c], Req(), 0.0) is c


def test_least_request_breaks_ties_randomly():
    """Equal replicas share the traffic under least_request."""
    policy = make("least_request")
    reps = [ep("a"), ep("b"), ep("c")]
    assert {policy.select(reps, Req(), 0.0).replica_id for _ in range(100)} == {"a", "b", "c"}


def test_round_robin_cycles_and_respects_weights():
    """Smooth weighted round robin: weights 2:1 give a 2:1 interleaved sequence."""
    policy = make("round_robin")
    a, b = ep("a", weight=2.0), ep("b", weight=1.0)
    seq = [policy.select([a, b], Req(), 0.0).replica_id for _ in range(6)]
    assert seq.count("a") == 4 and seq.count("b") == 2
    assert seq[:3] in (["a", "b", "a"], ["a", "a", "b"])
    plain = make("round_robin")
    reps = [ep("x"), ep("y"), ep("z")]
    assert [plain.select(reps, Req(), 0.0).replica_id for _ in range(6)] == ["x", "y", "z", "x", "y", "z"]


def test_random_follows_weights():
    """random never picks a zero-share replica and favours heavier ones."""
    policy = make("random", seed=3)
    heavy, light = ep("heavy", weight=9.0), ep("light", weight=1.0)
    picks = [policy.select([heavy, light], Req(), 0.0).replica_id for _ in range(1000)]
    assert 800 < picks.count("heavy") < 980


def test_prefix_cache_follows_the_cached_prefix():
    """A prompt sharing a long prefix with an earlier one goes to the same replica."""
    policy = make("prefix_cache")
    a, b = ep("a"), ep("b")
    system = "You are a helpful assistant. " * 20
    first = Req(prompt=system + "question one")
    chosen = policy.select([a, b], first, 0.0)
    policy.on_routed(chosen, first)
    other = b if chosen is a else a
    other.pending = 2  # the cached one is not the least loaded any more, but balance holds
    second = Req(prompt=system + "question two")
    assert policy.select([a, b], second, 0.0) is chosen


def test_prefix_cache_ignores_affinity_when_imbalanced():
    """When the cached replica is overloaded, the least-loaded replica wins."""
    policy = make("prefix_cache", balance_abs_threshold=4)
    a, b = ep("a"), ep("b")
    prompt = "shared context " * 50
    policy.on_routed(a, Req(prompt=prompt))
    a.pending = 40
    assert policy.select([a, b], Req(prompt=prompt + "more"), 0.0) is b


def test_prefix_cache_short_match_goes_to_least_loaded():
    """A match under cache_threshold of the prompt does not bind the request."""
    policy = make("prefix_cache")
    a, b = ep("a"), ep("b", pending=1)
    policy.on_routed(b, Req(prompt="x" * 64))
    assert policy.select([a, b], Req(prompt="x" * 64 + "y" * 1000), 0.0) is a


def test_prefix_tree_lru_and_forget():
    """The tree is bounded (oldest prefixes evicted) and forgets removed replicas."""
    tree = prefix_tree.PrefixTree(block_chars=8, max_blocks=4)
    tree.insert("a" * 8 * 3, "r1")
    tree.insert("b" * 8 * 3, "r2")
    assert len(tree) == 4
    assert tree.match("b" * 24, {"r1", "r2"}) == prefix_tree.Match(24, frozenset({"r2"}), 0)
    tree.forget({"r2"})
    assert tree.match("b" * 24, {"r1", "r2"}) is None


def test_prefix_tree_reports_every_holder_and_the_shared_part():
    """A lookup names all replicas with the longest match and the prefix every candidate holds."""
    tree = prefix_tree.PrefixTree(block_chars=8)
    system = "s" * 16
    for rid in ("r1", "r2", "r3"):
        tree.insert(system + rid * 4, rid)
    tree.insert(system + "r1" * 4 + "t" * 8, "r2")
    m = tree.match(system + "r1" * 4 + "t" * 8, {"r1", "r2", "r3"})
    assert m == prefix_tree.Match(32, frozenset({"r2"}), 16) and m.gain_chars == 16
    m = tree.match(system + "r1" * 4, {"r1", "r2", "r3"})
    assert m == prefix_tree.Match(24, frozenset({"r1", "r2"}), 16)


def _warm(policy, replicas, system):
    """Send one request with ``system`` to each replica, so every cache holds it."""
    for e in replicas:
        policy.on_routed(e, Req(prompt=system + f" warm-up for {e.replica_id}"))


def test_prefix_cache_ties_go_to_the_least_loaded_replica():
    """Replicas holding the same longest prefix: the least loaded wins, not the lowest id."""
    policy = make("prefix_cache")
    a, b, c, d = ep("a", pending=2), ep("b", pending=1), ep("c", pending=2), ep("d")
    context = "a long shared document " * 40
    for e in (a, b, c):
        policy.on_routed(e, Req(prompt=context))
    assert policy.select([a, b, c, d], Req(prompt=context + " question"), 0.0) is b


def test_prefix_cache_equal_ties_are_spread():
    """Equal matches at equal load alternate between the replicas (fewest recent requests first)."""
    policy = make("prefix_cache")
    a, b = ep("a"), ep("b")
    context = "a long shared document " * 40
    policy.on_routed(a, Req(prompt=context))
    policy.on_routed(b, Req(prompt=context))
    picks = []
    for i in range(40):
        req = Req(prompt=context + f" question {i}")
        chosen = policy.select([a, b], req, 0.0)
        policy.on_routed(chosen, req)
        picks.append(chosen.replica_id)
    assert picks.count("a") == picks.count("b") == 20


def test_shared_system_prompt_does_not_pile_short_requests_onto_one_replica():
    """Short prompts that share only a system prompt every replica holds are spread evenly by load."""
    policy = make("prefix_cache")
    replicas = [ep(r) for r in "abcd"]
    system = "You are a helpful assistant for ACME Corp. Answer briefly and politely. " * 6
    _warm(policy, replicas, system)
    counts = dict.fromkeys("abcd", 0)
    for i in range(400):
        req = Req(prompt=system + f"user question number {i}?")
        chosen = policy.select(replicas, req, 0.0)
        policy.on_routed(chosen, req)
        counts[chosen.replica_id] += 1
    assert all(85 <= n <= 115 for n in counts.values()), counts


def test_first_block_matched_everywhere_is_not_a_tie_for_the_lowest_id():
    """Prompts of a block or two that match the first block on every replica do not all go to 'a'."""
    policy = make("prefix_cache", block_chars=16)
    replicas = [ep(r) for r in "abcd"]
    _warm(policy, replicas, "<|user|>\nHello, ")
    counts = dict.fromkeys("abcd", 0)
    for i in range(100):
        req = Req(prompt=f"<|user|>\nHello, world {i:04d}")
        chosen = policy.select(replicas, req, 0.0)
        policy.on_routed(chosen, req)
        counts[chosen.replica_id] += 1
    assert max(counts.values()) <= 30, counts


def test_conversation_history_still_binds_beyond_the_shared_system_prompt():
    """A follow-up turn goes to the replica holding its history even though all hold the system prompt."""
    policy = make("prefix_cache")
    replicas = [ep(r) for r in "abcd"]
    system = "You are a helpful assistant. " * 10
    _warm(policy, replicas, system)
    turn1 = Req(prompt=system + "user: tell me about the history of the printing press in detail. " * 6)
    holder = replicas[2]
    policy.on_routed(holder, turn1)
    holder.pending = 2  # busier than the others, within cache_balance_abs_threshold
    assert policy.select(replicas, Req(prompt=turn1.prompt_text() + " assistant: ... user: and then?"), 0.0) is holder


def test_prefix_seen_by_one_replica_spills_when_it_is_busy():
    """A prefix only one replica holds does not queue requests there beyond cache_balance_abs_threshold."""
    policy = make("prefix_cache", cache_balance_abs_threshold=2)
    replicas = [ep(r) for r in "abcd"]
    document = "the quarterly report of ACME Corp, page one. " * 20
    holder = replicas[0]
    policy.on_routed(holder, Req(prompt=document))
    holder.pending = 2
    assert policy.select(replicas, Req(prompt=document + " summarise"), 0.0) is holder
    holder.pending = 3
    assert policy.select(replicas, Req(prompt=document + " summarise"), 0.0) is not holder


def test_new_prompts_go_where_the_least_prompt_was_sent_lately_within_the_slack():
    """A prompt no cache holds goes to the replica sent the fewest uncached prompt characters lately
    (its cache is under the least pressure and its prefill queue the shortest) among those within
    work_balance_slack outstanding requests of the least loaded; beyond that, to the least loaded."""
    policy = make("prefix_cache", work_balance_slack=2)
    a, b = ep("a", pending=1), ep("b", pending=3)
    for i in range(3):
        policy.on_routed(a, Req(prompt=f"long document {i} " * 2000))
        policy.on_routed(b, Req(prompt=f"short question {i}"))
    assert policy.select([a, b], Req(prompt="a new conversation " * 50), 0.0) is b
    b.pending = 4
    assert policy.select([a, b], Req(prompt="a new conversation " * 50), 0.0) is a


def test_a_long_history_is_worth_more_queue_than_a_short_document():
    """A follow-up whose cached history is long waits for the replica holding it through a queue that
    would make a short prompt spill: the queue is weighed against the prefill the cache saves."""
    policy = make("prefix_cache", cache_balance_abs_threshold=2)
    replicas = [ep(r) for r in "abcd"]
    for i in range(8):
        policy.on_routed(replicas[i % 4], Req(prompt=f"question {i}: " + "x" * 490))
    history = "user: the whole design review, turn by turn. " * 650  # 30k characters
    holder = replicas[0]
    policy.on_routed(holder, Req(prompt=history))
    follow_up = Req(prompt=history + " user: and the open risks?")
    holder.pending = 5
    assert policy.select(replicas, follow_up, 0.0) is holder
    holder.pending = 12
    assert policy.select(replicas, follow_up, 0.0) is not holder


def test_replica_back_from_an_absence_is_not_sent_every_tie():
    """A replica missing for a long while shares ties again within a few hundred requests, and is
    not sent every request until its old count catches up."""
    policy = make("prefix_cache")
    a, b = ep("a"), ep("b")
    for i in range(2000):  # b absent: every request to a
        policy.on_routed(a, Req(prompt=f"request {i}"))
    picks = []
    for i in range(1000):
        req = Req(prompt=f"after {i}")
        chosen = policy.select([a, b], req, 0.0)
        policy.on_routed(chosen, req)
        picks.append(chosen.replica_id)
    assert picks[0] == "b" and picks.index("a") < 200  # catches up on the recent memory only
    assert 230 <= picks[500:].count("a") <= 270  # then an even split
