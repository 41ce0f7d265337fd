// A setting that cannot be used (a wrong value, a missing file, two settings that contradict each other): the
// service refuses to start and says which setting and why. Every feature's settings module throws it, so it sits
// below them all.
export class ConfigError extends Error {}
