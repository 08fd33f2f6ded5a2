"""`Configurable`: the `from_config` and `repr` of an object its config defines."""


class Configurable:
    """Mixin of an object whose `get_config()` holds its constructor's
    arguments (a sampler, a process): built again from it, shown by it."""

    def get_config(self):
        raise NotImplementedError

    @classmethod
    def from_config(cls, config):
        return cls(**config)

    def __repr__(self):
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_config().items())
        return f"{type(self).__name__}({args})"
