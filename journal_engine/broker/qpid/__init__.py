"""What Qpid Broker-J adds on top of the common broker: a queue's maximum delivery count and its
dead-letter queue, from the queue-declare arguments (queue_policy.py), and the redelivery rules that
apply them (redelivery_rules.py)."""
