package voter

import "errors"

// ErrConfig is returned by New for an invalid Config.
var ErrConfig = errors.New("voter: invalid config")
