"""The pull path of every front (:mod:`broker.pull.service`)."""
