"""The configuration files of the seed systems, read safely into plain values and then a BrokerConfig.

* ``safe_xml``: the one safe-XML base every reader parses through (defusedxml: no DOCTYPE, entity or
  external reference; a size cap; a FIFO or device refused), line numbers, typed values, warnings for
  what is not implemented;
* ``artemis``: Artemis broker.xml and HornetQ configuration files;
* ``classic``: ActiveMQ Classic activemq.xml;
* ``model``: ``BrokerConfig``, what a reader gives the broker;
* ``systems``: ``load``, which recognises whose file it is (``journal_engine.config.load``).

Import from the modules themselves: this package's ``__init__`` imports nothing, so the address
settings (which read their XML through ``safe_xml``) and the readers (which build address settings)
do not import each other in a circle.
"""
