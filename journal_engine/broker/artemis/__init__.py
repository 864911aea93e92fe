"""Apache ActiveMQ Artemis's own configuration model, which the common broker is built on: address
settings with their hierarchical wildcard lookup and field-wise merge (address_settings.py), the
address wildcards they match with (wildcard.py), the names Artemis gives the properties of a
dead-letter or expiry copy (dialect.py), and its redelivery rules by those settings (redelivery_rules.py). Leaves of the broker: nothing here imports the rest of it."""
