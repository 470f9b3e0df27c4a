"""The one cost module: what a fleet bills, per hour and over a window, and how the bill splits.

    from meridian import cost

    pools = [cost.Pool(cost.Where("c1/l4", "c1", "aws", "us-east-1", "l4", "L4", "on_demand"),
                       gpus_per_node=1, nodes=3, price=cost.Price(0.80))]
    replicas = [cost.Replica("r1", "c1/l4", 1, cost.Owner("llama-3.1-8b", "chat-8b", "assistant"))]
    b = cost.bill(pools, replicas)      # b.usd == 2.40 $/h; b.shares_usd == 0.80; b.idle_usd == 1.60

Rules (``bill``): node-hours x price as the clouds bill (``prices``: the tier's price, a reserved
commitment's price up to its nodes and on demand beyond), idle GPUs included; each replica's share
is the GPUs it holds x its pool's price per GPU, the idle remainder shown apart, so shares + idle =
bill. ``Meter`` integrates bills over a window (nodes joining and leaving), with the tokens served;
``document`` turns either into the JSON every surface shows (the admin API's ``GET /v1/cost``,
``meridian cost``, the demo, the simulator), ``text`` into labelled lines and tables;
``compare.saving`` is the one saving figure. The cost floor is the scheduler's
(``scheduler/control/floor.py``): callers pass its figure in."""

from meridian.cost import compare, document, prices, text
from meridian.cost.bill import (
    DIMS,
    OWNER_DIMS,
    POOL_DIMS,
    Bill,
    Owner,
    Part,
    Pool,
    PoolLine,
    Replica,
    Row,
    Where,
    bill,
    group,
)
from meridian.cost.compare import SAVING_DEFINITION, saving
from meridian.cost.prices import Price, commitment, node_price, price_per_node_hour
from meridian.cost.window import Meter, PoolTotal, Tokens, Window

__all__ = [
    "DIMS", "OWNER_DIMS", "POOL_DIMS", "SAVING_DEFINITION", "Bill", "Meter", "Owner", "Part", "Pool", "PoolLine",
    "PoolTotal", "Price", "Replica", "Row", "Tokens", "Where", "Window", "bill", "commitment", "compare", "document",
    "group", "node_price", "price_per_node_hour", "prices", "saving", "text",
]
