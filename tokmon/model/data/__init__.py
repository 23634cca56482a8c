"""The facts and the request table: what crosses into the model, typed and checked."""
