"""Authentication and authorization of the broker's clients (issue 14): the users cached from the
controllers (:mod:`broker.auth.users`) and the request guard wired on the broker's server
(:mod:`broker.auth.guard`)."""
