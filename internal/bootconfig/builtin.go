package bootconfig

import (
	"bytes"
	"embed"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"text/template"
)

//go:embed templates/live
var builtinFS embed.FS

// builtinProducts names the product shown in the built-in boot menus per
// recipe; okd is an alias of scos.
var builtinProducts = map[string]struct{ Product, Class string }{
	"scos":  {"CentOS Stream CoreOS", "centos"},
	"okd":   {"CentOS Stream CoreOS", "centos"},
	"fcos":  {"Fedora CoreOS", "fedora"},
	"rhcos": {"RHEL CoreOS", "rhel"},
}

// BuiltinTemplateRecipes lists the recipes that have a built-in template set.
func BuiltinTemplateRecipes() []string {
	var names []string
	for n := range builtinProducts {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// builtinTemplates renders the built-in template set for a recipe into the
// same form an image's usr/share/coreos-assembler/live holds.
func builtinTemplates(recipe string) ([]templateFile, error) {
	p, ok := builtinProducts[recipe]
	if !ok {
		return nil, fmt.Errorf("loading built-in live templates: unknown recipe %q (valid: %s)", recipe, strings.Join(BuiltinTemplateRecipes(), ", "))
	}
	vars := struct{ Product, Class, EmbedArea string }{
		Product: p.Product,
		Class:   p.Class,
		// 1024 '#' in all: the last one starts the marker comment.
		EmbedArea: strings.Repeat("#", 1023) + strings.TrimSuffix(embedAreaMarker, "\n"),
	}
	const root = "templates/live"
	var files []templateFile
	err := fs.WalkDir(builtinFS, root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		raw, err := builtinFS.ReadFile(p)
		if err != nil {
			return err
		}
		t, err := template.New(path.Base(p)).Option("missingkey=error").Parse(string(raw))
		if err != nil {
			return err
		}
		var b bytes.Buffer
		if err := t.Execute(&b, vars); err != nil {
			return err
		}
		files = append(files, templateFile{path: strings.TrimPrefix(p, root+"/"), data: b.Bytes()})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("loading built-in live templates: %w", err)
	}
	return files, nil
}

// loadTemplateDir reads an image's live template directory. Every file is
// treated as text, README-devel.md is skipped (as coreos-assembler does),
// and anything but regular files and directories is refused: the image
// must not pull host files in through symlinks.
func loadTemplateDir(dir string) ([]templateFile, error) {
	var files []templateFile
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		if !d.Type().IsRegular() {
			return fmt.Errorf("%s: not a regular file", p)
		}
		if d.Name() == "README-devel.md" {
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		files = append(files, templateFile{path: filepath.ToSlash(rel), data: data, exec: fi.Mode()&0o111 != 0})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("loading live templates from %s: %w", dir, err)
	}
	return files, nil
}
