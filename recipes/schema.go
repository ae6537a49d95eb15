package recipes

import (
	"encoding/json"
	"reflect"
	"strings"
)

// Schema returns the JSON schema of a recipe file, derived from the Recipe
// struct (the source of truth) so the documented format cannot drift.
func Schema() ([]byte, error) {
	s := schemaOf(reflect.TypeOf(Recipe{}))
	s["$schema"] = "https://json-schema.org/draft/2020-12/schema"
	s["title"] = "scos-builder recipe"
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

func schemaOf(t reflect.Type) map[string]any {
	switch t.Kind() {
	case reflect.String:
		return map[string]any{"type": "string"}
	case reflect.Slice:
		return map[string]any{"type": "array", "items": schemaOf(t.Elem())}
	case reflect.Struct:
		props := map[string]any{}
		var required []string
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			props[name] = schemaOf(f.Type)
			if opts != "omitempty" {
				required = append(required, name)
			}
		}
		return map[string]any{"type": "object", "properties": props, "required": required, "additionalProperties": false}
	}
	return map[string]any{}
}
