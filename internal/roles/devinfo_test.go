package roles

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestReadDevInfo(t *testing.T) {
	dir := t.TempDir()
	if _, err := ReadDevInfo(dir); !os.IsNotExist(err) {
		t.Errorf("no dev.json: %v, want not-exist", err)
	}
	want := DevInfo{ControlPlane: "http://127.0.0.1:7878", Worker: "http://127.0.0.1:1", SimulatedModel: true}
	d := &Dev{cfg: DevConfig{DataDir: dir}, Info: want}
	if err := d.writeInfo(); err != nil {
		t.Fatal(err)
	}
	if got, err := ReadDevInfo(dir); err != nil || got != want {
		t.Errorf("ReadDevInfo = %+v, %v; want %+v", got, err, want)
	}
	for name, content := range map[string]string{
		"not JSON":  "controlplane=http://x",
		"too large": `{"controlplane": "` + strings.Repeat("a", maxDevInfo) + `"}`,
	} {
		if err := os.WriteFile(filepath.Join(dir, devInfoFile), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if got, err := ReadDevInfo(dir); err == nil || got != (DevInfo{}) {
			t.Errorf("%s: ReadDevInfo = %+v, %v; want an error and nothing", name, got, err)
		}
	}
}
