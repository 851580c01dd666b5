from google.protobuf import descriptor_pb2 as _descriptor_pb2
from google.protobuf import descriptor as _descriptor
from typing import ClassVar as _ClassVar

DESCRIPTOR: _descriptor.FileDescriptor
ETCD_VERSION_MSG_FIELD_NUMBER: _ClassVar[int]
etcd_version_msg: _descriptor.FieldDescriptor
ETCD_VERSION_FIELD_FIELD_NUMBER: _ClassVar[int]
etcd_version_field: _descriptor.FieldDescriptor
ETCD_VERSION_ENUM_FIELD_NUMBER: _ClassVar[int]
etcd_version_enum: _descriptor.FieldDescriptor
ETCD_VERSION_ENUM_VALUE_FIELD_NUMBER: _ClassVar[int]
etcd_version_enum_value: _descriptor.FieldDescriptor
