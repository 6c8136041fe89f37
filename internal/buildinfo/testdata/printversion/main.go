// Command printversion prints buildinfo.Get().Line("printversion"): the
// package's test builds it with -ldflags -X to check that the variables
// the release build stamps are there under their documented names.
package main

import (
	"fmt"

	"github.com/carve-dev/carve/internal/buildinfo"
)

func main() {
	fmt.Println(buildinfo.Get().Line("printversion"))
}
