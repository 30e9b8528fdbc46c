package main

// MyWeb as a kubebuilder project declares it (controller-gen would write the DeepCopy methods;
// they are written by hand here, for three fields).

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var groupVersion = schema.GroupVersion{Group: "operator.k8s-summit.org", Version: "v1"}

type MyWebSpec struct {
	Image           string `json:"image,omitempty"`
	NodePortNumber  int32  `json:"nodePortNumber"`
	PageContentHTML string `json:"pageContentHtml,omitempty"`
}

type MyWebStatus struct {
	Completed          bool               `json:"completed,omitempty"`
	ObservedGeneration int64              `json:"observedGeneration,omitempty"`
	Conditions         []metav1.Condition `json:"conditions,omitempty"`
}

type MyWeb struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              MyWebSpec   `json:"spec,omitempty"`
	Status            MyWebStatus `json:"status,omitempty"`
}

type MyWebList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []MyWeb `json:"items"`
}

func (in *MyWeb) DeepCopyInto(out *MyWeb) {
	*out = *in
	out.TypeMeta = in.TypeMeta
	in.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	out.Spec = in.Spec
	out.Status = in.Status
	if in.Status.Conditions != nil {
		out.Status.Conditions = make([]metav1.Condition, len(in.Status.Conditions))
		for i := range in.Status.Conditions {
			in.Status.Conditions[i].DeepCopyInto(&out.Status.Conditions[i])
		}
	}
}

func (in *MyWeb) DeepCopy() *MyWeb {
	if in == nil {
		return nil
	}
	out := new(MyWeb)
	in.DeepCopyInto(out)
	return out
}

func (in *MyWeb) DeepCopyObject() runtime.Object { return in.DeepCopy() }

func (in *MyWebList) DeepCopyObject() runtime.Object {
	if in == nil {
		return nil
	}
	out := new(MyWebList)
	*out = *in
	in.ListMeta.DeepCopyInto(&out.ListMeta)
	if in.Items != nil {
		out.Items = make([]MyWeb, len(in.Items))
		for i := range in.Items {
			in.Items[i].DeepCopyInto(&out.Items[i])
		}
	}
	return out
}

func addKnownTypes(scheme *runtime.Scheme) error {
	scheme.AddKnownTypes(groupVersion, &MyWeb{}, &MyWebList{})
	metav1.AddToGroupVersion(scheme, groupVersion)
	return nil
}
