"""The broker's side of controller mode, one concern a module; ``broker.replicas_manager``
composes them (docs/architecture.md, "Controller mode").

- ``group_info``: reading the controllers' answers about this broker's group;
- ``registration``: the persistent broker id and CONTROLLER_REGISTER_BROKER;
- ``lease``: the fencing lease a master writes under;
- ``heartbeat``: BROKER_HEARTBEAT to the active controller, on the controller link's thread;
- ``poll``: polling the group's metadata (pushes only make it poll now), election requests;
- ``roles``: applying the controllers' answer: master or slave through the HAService;
- ``routes``: REGISTER_BROKER of this broker's topics with every controller;
- ``config_sync``: a slave's copy of its master's topics, offsets and subscription groups.
"""
