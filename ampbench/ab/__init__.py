"""``ampbench ab``: base and head run in pairs on one card, in balanced order, each pair's log ratio of head
to base judged by the gate's judge with the base side as its ``Reference``."""
