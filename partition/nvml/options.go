package nvml

// Option configures the NVML implementation that New and NewFrom return.
type Option func(*options)

// buildOptions applies opts over the defaults: os/exec for nvidia-smi,
// DefaultResetTimeout, and (with cgo) no V2 profile info reader.
func buildOptions(opts []Option) options {
	o := options{run: execRunner, resetTimeout: DefaultResetTimeout}
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	return o
}
