"""Products that embed journal_engine in other people's software.

* ``journal_engine.integrations.coilmq``: a storage backend (``coilmq.store.QueueStore``) for the
  coilmq STOMP broker, and ``serve()`` behind ``journal-engine serve-stomp`` (docs/integrations.md).
* ``journal_engine.integrations.kombu``: a kombu transport on that server,
  ``kombu.Connection("journal-engine://HOST:PORT")`` and Celery's ``broker_url``; its exchanges and
  bindings live in the server (``exchanges.py``).

Each integration imports its host software only inside its own module, so importing this package
needs nothing beyond journal_engine.
"""
