"""The scheduling core: model, quantities, node index, session, statement, hookspecs, backends."""
