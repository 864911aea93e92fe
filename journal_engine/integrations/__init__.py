"""Products that embed journal_engine in other people's software.

* ``journal_engine.integrations.coilmq``: a storage backend (``coilmq.store.QueueStore``) for the
  coilmq STOMP broker, and a coilmq server on it (``serve()``): the example of our store inside
  another broker (docs/integrations.md). ``journal-engine serve-stomp`` runs ``journal_engine.served``.
* ``journal_engine.integrations.stomp_frames``: the STOMP frame reader and writer both servers and the
  kombu transport use.
* ``journal_engine.integrations.kombu``: a kombu transport on ``journal-engine serve-stomp``,
  ``kombu.Connection("journal-engine://HOST:PORT")`` and Celery's ``broker_url``; its exchanges and
  bindings live in the server (``exchanges.py``).

Each integration imports its host software only inside its own module, so importing this package
needs nothing beyond journal_engine.
"""
