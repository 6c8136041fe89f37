package configs

import "github.com/carve-dev/carve/internal/textfmt"

// DynamicPlaces returns the places of the file's dynamic entries
// ("profiles.hybrid[1].dynamic"), by profile name and then entry. Such
// entries are realised only by agents that run --advertise dra (their MIG
// devices are offered through DRA and made for claims); the file does not
// say which nodes do, so a tool that checks the file alone notes them.
func (f *File) DynamicPlaces() []string {
	var out []string
	for _, name := range sortedKeys(f.Profiles) {
		for i, e := range f.Profiles[name] {
			if e.Dynamic != nil {
				out = append(out, textfmt.Field(textfmt.Item(textfmt.Field(fieldProfiles, name), i), fieldDynamic))
			}
		}
	}
	return out
}
