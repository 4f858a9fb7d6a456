"""What the daemon serves over HTTP: ``server`` (the asyncio server for ``/metrics`` and every
other path, keep-alive, TLS), ``auth`` (its basic auth, guesses paced), ``page`` (the page at ``/`` and its JSON API),
``charts`` (SVG charts, for the page and the burn-in report alike).

May import: ``model``, ``system``, ``config``, ``alerts``, ``sinks``, ``exporters`` and the
pipeline (the page reads what it holds)."""
