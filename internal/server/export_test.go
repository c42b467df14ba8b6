package server

// FloodInterval is the attach writer's spacing of data frames under a
// flood, for the tests of package server_test.
const FloodInterval = floodInterval
