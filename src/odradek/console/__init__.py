"""`odradek console`: a web console for an Odradek (or any Kafka) cluster.

It runs as its own process and is a client of the cluster: every page is built from Odradek's
own Admin and Consumer clients (`odradek.client`), never from broker internals, so it works
against any broker the clients speak to. Layer: like `odradek.cli`, above `odradek.client`.

* `service`: what the pages show, as plain data, fetched with the admin client.
* `app`: the aiohttp application (routes, read-only mode, Jinja2 templates in `templates/`).
* `live`: the message browser's live tail (server-sent events, one ungrouped consumer each).
* `sampler`: lag and throughput sampled every few seconds into bounded rings.
* `charts`: those rings as inline SVG line charts (overview, topic and group pages).
* `acls`, `quotas`: the ACLs and client quotas pages.
* `auth`: logging in as a user of the cluster when its listener needs SASL (sessions).

The command line, `odradek console`, is `odradek.cli.web_console`.
"""
