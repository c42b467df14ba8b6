package server

// FramesPerSecond bounds an attach client's data frames in any second,
// for the tests of package server_test.
const FramesPerSecond = framesPerSecond
