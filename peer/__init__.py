"""The desktop peer: a daemon that keeps a peer attached to its access point (super-peer), and the
``peer`` command that talks to it.

Modules, from the protocol outwards:

* ``peer.session`` - the peer's end of a connection, sans-IO (handshake, secure identification,
  answers matched to requests and look-ups, timers, what to re-send after reconnecting, backoff);
* ``peer.client`` - the trio runtime around it: TLS, connecting, reconnecting, requests,
  look-ups, notifications;
* ``peer.identity`` - the peer's key and the private identifier its access point issued;
* ``peer.state`` / ``peer.inbox`` / ``peer.files`` - what the peer keeps on disk, durably;
* ``peer.control`` - the local control protocol (and the command side's blocking client);
* ``peer.published`` - the journal of what the peer published (to change and retract it);
* ``peer.daemon`` - ``serve_peer``: the client plus the control socket and the commands;
* ``peer.ui`` - the local web app the daemon serves, acting through the same commands;
* ``peer.config`` / ``peer.cli`` - configuration and the ``peer`` command.

Nothing is re-exported here: ``peer.cli`` is imported by every command, which must start without
loading trio or the daemon.
"""
