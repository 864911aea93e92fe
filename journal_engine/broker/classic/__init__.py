"""What ActiveMQ Classic adds on top of the common broker, for ``Broker(config=activemq.xml)``: its
destinations and destination map (destinations.py), the consumer's RedeliveryPolicy (policy.py), the
dead-letter strategies (dead_letter_strategy.py), the two broker plugins of the dead-letter path
(plugins.py), what an activemq.xml says as objects (config.py), Classic's dead-letter path itself
(dead_letters.py) and its redelivery rules, the broker's and a consumer's policy's (redelivery_rules.py). The common broker's model (messages, queues, the post office) is imported here;
the broker's engine (redelivery, delivery, broker.py) imports this package, never the reverse."""
