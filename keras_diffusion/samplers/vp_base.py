"""`VPSampler`: the base of the samplers that plan on a VP schedule (DDPM,
DDIM, RePaint)."""

from keras_diffusion.samplers.base import Sampler
from keras_diffusion.schedules.vp_sampling import discrete_timesteps


class VPSampler(Sampler):
    """A sampler that plans on a VP schedule's `alphas_cumprod` (and betas),
    at diffusers' discrete timesteps: it steps on VP processes only."""

    steps_on = {"vp": ()}

    def _spaced_timesteps(self, schedule):
        """Its steps' timesteps on `schedule`: int64, spaced as diffusers
        does."""
        return discrete_timesteps(
            schedule,
            self._steps_for(schedule),
            self.timestep_spacing,
            self.steps_offset,
        )
